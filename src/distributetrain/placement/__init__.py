"""placement"""
